// The CUDA kernels of kernels/cuda/activations.cu, compiled as C++ for the CUDA
// emulator (device/cuda/emulator.h).
#include "kernels/cuda/activations.cu"  // NOLINT(bugprone-suspicious-include)
