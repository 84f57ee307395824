"""KernelIR -> Amaranth hardware: planning (how buffers are laid out in banks and block RAMs)
and building (datapath, pipeline schedule, controller, kernels, the top that runs them).

    planning    layout (banked layouts of buffers), packing (mem_pack), bram (block-RAM geometry)
    building    datapath, floatops, pipeline (fp_pipeline schedule), program (steps), tail
                (LUT-RAM tails), kernel (one kernel's module), top (the DAG of kernels, copies, host bus)
"""
