// Explicit 2-D heat equation, one step of a 5-point stencil over a batch of ny x nx grids.
// Boundary cells keep their value (Dirichlet), so every output element is written each step.
// Opts in to programmatic dependent launch (pdl.cuh): waits for the previous step before reading.
extern "C" __global__ void heat_step(const float* __restrict__ u, float* __restrict__ out,
                                     int batch, int ny, int nx, float alpha) {
    CUPYGRAPH_PDL_TRIGGER();
    CUPYGRAPH_PDL_WAIT();
    long long total = (long long)batch * ny * nx;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        int x = (int)(i % nx);
        int y = (int)((i / nx) % ny);
        float c = u[i];
        if (x == 0 || y == 0 || x == nx - 1 || y == ny - 1) {
            out[i] = c;
        } else {
            float lap = u[i - 1] + u[i + 1] + u[i - nx] + u[i + nx] - 4.0f * c;
            out[i] = c + alpha * lap;
        }
    }
}
