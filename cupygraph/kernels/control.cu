// Device halves of cupygraph.while_loop, cupygraph.cond and cupygraph.switch: turn a device scalar into
// the value of a CUDA graph conditional handle, so the graph decides on the device which body runs.
//
// cudaGraphSetConditional is a device-runtime builtin that the driver resolves when the module is
// loaded; declaring it here (instead of including cuda_device_runtime_api.h) keeps the source
// compilable by plain NVRTC with no CUDA headers on the include path. Needs CUDA 12.4+.
// Each kernel waits (pdl.cuh) before reading the flag, so an edge from a kernel that opted in can
// be programmatic; none triggers early, as what follows each is a conditional node.
typedef __device_builtin__ unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(cudaGraphConditionalHandle handle,
                                                                     unsigned int value);

// The truth of a one-element array, read with its own width so every integer and bool dtype is
// exact. kind > 0: an integer or bool of `kind` bytes; -4 / -8: float32 / float64 (x != 0, so NaN
// is true and -0.0 is false, as in Python).
__device__ __forceinline__ unsigned int truth_of(const void* flag, int kind) {
    switch (kind) {
        case 1: return *(const unsigned char*)flag != 0;
        case 2: return *(const unsigned short*)flag != 0;
        case 4: return *(const unsigned int*)flag != 0u;
        case 8: return *(const unsigned long long*)flag != 0ull;
        case -4: return *(const float*)flag != 0.0f;
        case -8: return *(const double*)flag != 0.0;
        default: return 0u;
    }
}

// IF nodes: `on_true` runs its body when the flag is true; with `has_false`, `on_false` (the
// else-branch node's handle) gets the negation. Both come from one read of the flag, so a true
// branch that writes to the flag cannot make the false branch run too.
extern "C" __global__ void cg_set_if(cudaGraphConditionalHandle on_true, cudaGraphConditionalHandle on_false,
                                     int has_false, const void* flag, int kind) {
    CUPYGRAPH_PDL_WAIT();
    unsigned int value = truth_of(flag, kind);
    cudaGraphSetConditional(on_true, value);
    if (has_false) {
        cudaGraphSetConditional(on_false, value ^ 1u);
    }
}

// WHILE node, before the node: the iteration counter starts at 0 and the body runs at all only when
// the condition holds and max_iters (negative: no limit) allows one iteration.
extern "C" __global__ void cg_while_begin(cudaGraphConditionalHandle handle, const void* flag, int kind,
                                          int* count, long long max_iters) {
    CUPYGRAPH_PDL_WAIT();
    *count = 0;
    cudaGraphSetConditional(handle, truth_of(flag, kind) && max_iters != 0);
}

// WHILE node, last node of the body: count the iteration just run, then loop again only when the
// re-evaluated condition holds and the count is still below max_iters.
extern "C" __global__ void cg_while_step(cudaGraphConditionalHandle handle, const void* flag, int kind,
                                         int* count, long long max_iters) {
    CUPYGRAPH_PDL_WAIT();
    int done = *count + 1;
    *count = done;
    cudaGraphSetConditional(handle, truth_of(flag, kind) && (max_iters < 0 || (long long)done < max_iters));
}

// SWITCH node: the node runs body `value` when value < size and no body otherwise. The index is read
// with its own width and sign (bytes, is_signed), so a negative or too large index of any integer
// dtype runs no branch, never one chosen by truncating it to 32 bits.
extern "C" __global__ void cg_set_switch(cudaGraphConditionalHandle handle, const void* index, int bytes,
                                         int is_signed, unsigned int size) {
    CUPYGRAPH_PDL_WAIT();
    unsigned int value = size;
    if (is_signed) {
        long long at;
        switch (bytes) {
            case 1: at = *(const signed char*)index; break;
            case 2: at = *(const short*)index; break;
            case 4: at = *(const int*)index; break;
            default: at = *(const long long*)index; break;
        }
        if (at >= 0 && at < (long long)size) value = (unsigned int)at;
    } else {
        unsigned long long at;
        switch (bytes) {
            case 1: at = *(const unsigned char*)index; break;
            case 2: at = *(const unsigned short*)index; break;
            case 4: at = *(const unsigned int*)index; break;
            default: at = *(const unsigned long long*)index; break;
        }
        if (at < (unsigned long long)size) value = (unsigned int)at;
    }
    cudaGraphSetConditional(handle, value);
}
