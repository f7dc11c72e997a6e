// A kernel that must spill registers on every architecture (96 live floats
// per thread at 1024 threads x 2 blocks per SM): compiled with the build's
// ptxas flags, it must fail (tests/kernels/CMakeLists.txt), which shows the
// spill check still guards the real kernels.
__global__ void __launch_bounds__(1024, 2) SpillProbe(float* out, const float* in, int n) {
  float acc[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) acc[i] = in[threadIdx.x + i * n];
  float s = 0;
#pragma unroll
  for (int j = 0; j < 96; ++j) {
#pragma unroll
    for (int i = 0; i < 96; ++i) s += acc[i] * acc[(i + j) % 96];
  }
  out[threadIdx.x] = s;
}
