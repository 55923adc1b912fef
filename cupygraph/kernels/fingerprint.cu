// A hash of a span of device memory: whether a function wrote into an array it reads by address is
// told by hashing the array before and after the function ran (cupygraph/cache/first_call.py). The
// bytes are read once and never copied: a copy of large weights would cost as much memory again.
// Each word is mixed with its index (a permutation changes the hash); the mixes are summed and
// xor-ed, which do not depend on the order the threads run in.
// Both kernels opt in to programmatic dependent launch like every shipped kernel (pdl.cuh); they
// run outside graphs, where waiting returns at once.

__device__ __forceinline__ unsigned long long cupygraph_mix(unsigned long long word, unsigned long long index) {
    unsigned long long h = word ^ (index * 0x9E3779B97F4A7C15ull);
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
    return h;
}

// One warp's sums and xors folded, then added into out[0] and xor-ed into out[1] by its first lane.
__device__ __forceinline__ void cupygraph_fold(unsigned long long sum, unsigned long long mixed,
                                               unsigned long long* out) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        sum += __shfl_down_sync(0xffffffffu, sum, offset);
        mixed ^= __shfl_down_sync(0xffffffffu, mixed, offset);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(out, sum);
        atomicXor(out + 1, mixed);
    }
}

// The loop both kernels run over ``n`` elements of type T; each element is widened and offset by
// Offset first (bytes add 1, so a zero byte still mixes differently from a missing one).
template <typename T, unsigned long long Offset>
__device__ __forceinline__ void cupygraph_fingerprint_span(const T* __restrict__ data, long long n,
                                                           unsigned long long* out) {
    CUPYGRAPH_PDL_TRIGGER();
    CUPYGRAPH_PDL_WAIT();
    unsigned long long sum = 0, mixed = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        unsigned long long h = cupygraph_mix((unsigned long long)data[i] + Offset, (unsigned long long)i);
        sum += h;
        mixed ^= cupygraph_mix(h, 0x2545F4914F6CDD1Dull);
    }
    cupygraph_fold(sum, mixed, out);
}

// 8-byte words (an aligned span whose length is a multiple of 8).
extern "C" __global__ void cupygraph_fingerprint_words(const unsigned long long* __restrict__ words,
                                                       long long n, unsigned long long* out) {
    cupygraph_fingerprint_span<unsigned long long, 0ull>(words, n, out);
}

// Single bytes: any other span.
extern "C" __global__ void cupygraph_fingerprint_bytes(const unsigned char* __restrict__ bytes,
                                                       long long n, unsigned long long* out) {
    cupygraph_fingerprint_span<unsigned char, 1ull>(bytes, n, out);
}
