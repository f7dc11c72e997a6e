// The CUDA kernels of kernels/cuda/attention_mma.cu, compiled as C++ for the CUDA
// emulator (device/cuda/emulator.h).
#include "kernels/cuda/attention_mma.cu"  // NOLINT(bugprone-suspicious-include)
