#pragma once

// GPU staging of train_cnn's prefetched batches (data/batch_memory.h): each of the pipeline's
// slots is a pinned host buffer (page-locked, so the copy is a true asynchronous DMA) plus a
// device buffer, and the loader thread that gathered a batch starts its host-to-device copy on a
// copy stream of its own. Two events per slot order everything without a host wait on the
// training thread:
//
//   loader thread (slot s):  wait for copied[s]        the last copy out of the pinned buffer is
//                                                      done: it may be overwritten
//                            gather into pinned[s]
//                            copy stream waits consumed[s]   the compute stream has passed the
//                                                      last step that read device[s]
//                            copy pinned[s] -> device[s] on the copy stream; record copied[s]
//   training thread:         compute stream waits copied[s]; forward pass from device[s]
//                            (CudnnModel::enqueue_forward_device), backward pass
//                            release(s): record consumed[s] on the compute stream
//
// So the copy of batch k+1 (and its gathering on the host) runs while the kernels of step k run.
// Compiled into train_cnn with the cuDNN model only (TRAIN_CNN_GPU_MODEL).

#include <cuda_runtime_api.h>

#include <memory>

#include "data/batch_memory.h"

namespace train_cnn::gpu {

// The staging memory for a model on `device` whose kernels run on `compute`.
std::unique_ptr<data::BatchMemory> make_staged_batch_memory(int device, cudaStream_t compute);

}  // namespace train_cnn::gpu
