def build(dtype:
    return None
