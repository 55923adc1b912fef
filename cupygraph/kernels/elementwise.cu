// Tiny elementwise kernels: the launch-bound work CUDA graphs exist for.
// Both opt in to programmatic dependent launch (pdl.cuh, prepended by cupygraph): the next kernel
// may launch at once, and each waits for the previous one before reading its input.

// y = a * x + b, elementwise.
extern "C" __global__ void affine(const float* __restrict__ x, float* __restrict__ y,
                                  long long n, float a, float b) {
    CUPYGRAPH_PDL_TRIGGER();
    CUPYGRAPH_PDL_WAIT();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        y[i] = a * x[i] + b;
    }
}

// y = x * sigmoid(x) scaled, elementwise; keeps a chain of launches numerically bounded.
extern "C" __global__ void squash(const float* __restrict__ x, float* __restrict__ y, long long n) {
    CUPYGRAPH_PDL_TRIGGER();
    CUPYGRAPH_PDL_WAIT();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = v / (1.0f + fabsf(v));
    }
}
