"""A user model file that fails while being imported."""
SCALE = 1 // 0


def build(dtype):
    return {"x": ((4,), dtype)}, lambda x: x
