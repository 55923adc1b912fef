// The chain's two kernels (tools/bench_workloads.py, workload chain-rawmodule) as a user writes them for
// plain cupy.RawModule: no cupygraph builder, header or registration. Each opens by letting the next
// kernel launch, then waits for its producers before touching memory (programmatic dependent launch,
// issue 30). griddepcontrol needs sm_90; below it the guard leaves plain kernels.

extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y,
                                  long long n, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        y[i] = a * x[i] + b;
    }
}

extern "C" __global__ void squash(const float* __restrict__ x, float* __restrict__ y, long long n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = v / (1.0f + fabsf(v));
    }
}
