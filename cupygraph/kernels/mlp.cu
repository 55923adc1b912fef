// One MLP layer: y = gelu(x @ w + b) with the tanh approximation of GELU, float32.
// x is m x k, w is k x n (row-major, so the layer is x @ w), b has n entries, y is m x n.
// Launch with 32 x 32 threads per block and a grid of (ceil(n / 32), ceil(m / 32)) blocks.
// Each thread accumulates one output in a fixed order, so results are deterministic run to run.
// Opts in to programmatic dependent launch (pdl.cuh): waits for the previous kernel before reading,
// and lets the next one launch once its own tiles are done (earlier, its blocks would only take
// the SM slots this layer's blocks still need).

#define TILE 32

extern "C" __global__ void linear_gelu(const float* __restrict__ x, const float* __restrict__ w,
                                       const float* __restrict__ b, float* __restrict__ y,
                                       int m, int n, int k) {
    // A warp is one row of the block: it reads xs[ty][i] as a broadcast and ws[i][tx] as 32
    // consecutive words, so neither tile needs padding against bank conflicts.
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE];
    CUPYGRAPH_PDL_WAIT();
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < k; t += TILE) {
        const int xc = t + tx;
        const int wr = t + ty;
        xs[ty][tx] = (row < m && xc < k) ? x[(long long)row * k + xc] : 0.0f;
        ws[ty][tx] = (wr < k && col < n) ? w[(long long)wr * n + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < TILE; ++i) {
            acc += xs[ty][i] * ws[i][tx];
        }
        __syncthreads();
    }
    CUPYGRAPH_PDL_TRIGGER();
    if (row < m && col < n) {
        const float v = acc + b[col];
        const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);  // sqrt(2/pi)
        y[(long long)row * n + col] = 0.5f * v * (1.0f + tanhf(inner));
    }
}
