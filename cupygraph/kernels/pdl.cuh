// cupygraph's programmatic dependent launch (PDL) macros, for kernels that opt in.
//
// A kernel opts in by calling CUPYGRAPH_PDL_WAIT() before its first global-memory read or write;
// in a cupygraph graph the edge into it may then become a programmatic edge, so it is launched
// while the kernel before it still runs. The wait returns once every kernel it depends on has
// finished and its writes are visible. CUPYGRAPH_PDL_TRIGGER() lets the kernels after this one be
// launched early; it is always safe (they still wait for this kernel to finish), and placed first
// it saves the most on small kernels.
//
// cupygraph converts an edge only when it finds, in the kernel's PTX, an unconditional
// griddepcontrol.wait before any global or generic memory access, branch or call: put the wait
// at the top of the kernel, before any early return. Both macros are no-ops before sm_90 (and in
// host code), where kernels keep plain edges. Include this file in a cupy.RawKernel / RawModule
// (with -I<its folder>), or compile with cupygraph.pdl_kernel / cupygraph.pdl_module, which
// prepend it: either way cupygraph finds the module behind a graph's kernel and scans its PTX.
#ifndef CUPYGRAPH_PDL_CUH
#define CUPYGRAPH_PDL_CUH

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define CUPYGRAPH_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define CUPYGRAPH_PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define CUPYGRAPH_PDL_WAIT() do { } while (0)
#define CUPYGRAPH_PDL_TRIGGER() do { } while (0)
#endif

#endif  // CUPYGRAPH_PDL_CUH
