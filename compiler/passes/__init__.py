"""The KernelIR -> KernelIR passes between lowering and building, one module per pass; the
order they run in is compiler.compile_model's.

    parallelize  lanes and reduce_unroll: unroll-and-jam, adder trees, banked memories
    fuse         loop_fusion: initialisations and result stores into the nest's first and last steps
    interleave   fp_pipeline: a float sum's pipelined adder fed by several output rows in turn
    split_deep   fp_pipeline: memories deeper than a block RAM split into parts
    rewrite      what they share: substitution that keeps shared nodes shared, node constructors

Each pass returns a new KernelIR that computes the same values, checked by `ir.verify` like a
freshly lowered kernel.
"""
