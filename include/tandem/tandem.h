// Tandem's public API: one include for a program of your own (docs/api.md walks through it).
//   #include <tandem/tandem.h>            target_link_libraries(app PRIVATE Tandem::tandem)
//
// What a user meets, in order:
//   Tensor, Device, DType                          runtime/tensor.h
//   Module (your own layer), Parameter, Model      runtime/module.h, runtime/model.h
//   layers: Linear, ReLU, GELU, LayerNorm, ...     runtime/layers/
//   BatchNorm (Sync over replicas), buffers        runtime/layers/batchnorm.h, runtime/module.h
//   ActivationCheckpoint (recompute in backward)   runtime/layers/activation_checkpoint.h
//   kernels_for(device): the ops a layer calls     runtime/kernels.h
//   Dataset, DataLoader, TextDataset, Batch        runtime/data/
//   Optimizer (SGD, AdamW), LrSchedule             runtime/optim/optimizer.h
//   parallelize(): single | dp | ddp               runtime/strategy/parallel.h
//   the process group, from the environment       collectives/init.h
//   checkpoints: save, resume                      runtime/checkpoint/checkpoint.h
//   Tracer, RunSummary                             runtime/trace.h, models/summary.h
//   the zoo: mlp, cnn, resnet, gpt                 models/zoo.h, models/resnet.h, models/gpt.h
// Everything is in namespace tandem.
#pragma once

#include "tandem/version.h"

#include "runtime/tensor.h"
#include "runtime/module.h"
#include "runtime/model.h"
#include "runtime/freeze.h"
#include "runtime/kernels.h"
#include "runtime/layers/activation.h"
#include "runtime/layers/activation_checkpoint.h"
#include "runtime/layers/batchnorm.h"
#include "runtime/layers/global_avg_pool.h"
#include "runtime/layers/attention.h"
#include "runtime/layers/conv2d.h"
#include "runtime/layers/dropout.h"
#include "runtime/layers/embedding.h"
#include "runtime/layers/flatten.h"
#include "runtime/layers/layer_util.h"
#include "runtime/layers/layernorm.h"
#include "runtime/layers/linear.h"
#include "runtime/layers/loss.h"
#include "runtime/layers/regression_loss.h"
#include "runtime/layers/info_nce.h"
#include "runtime/layers/maxpool2d.h"
#include "runtime/layers/tied_linear.h"
#include "runtime/layers/transformer_block.h"
#include "runtime/data/dataset.h"
#include "runtime/data/loader.h"
#include "runtime/data/sampler.h"
#include "runtime/data/text.h"
#include "runtime/optim/optimizer.h"
#include "runtime/strategy/strategy.h"
#include "runtime/strategy/parallel.h"
#include "runtime/strategy/gather.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/trace.h"
#include "collectives/init.h"
#include "collectives/process_group.h"
#include "models/zoo.h"
#include "models/gpt.h"
#include "models/resnet.h"
#include "models/generate.h"
#include "models/summary.h"
