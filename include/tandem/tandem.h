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
//   Tracer, RunSummary                             runtime/trace.h, runtime/strategy/summary.h
//   the zoo: mlp, cnn, resnet, gpt                 zoo/zoo.h, zoo/resnet.h, zoo/gpt.h
// Everything is in namespace tandem.
#pragma once

#include "tandem/version.h"

#include "tandem/runtime/tensor.h"
#include "tandem/runtime/module.h"
#include "tandem/runtime/model.h"
#include "tandem/runtime/freeze.h"
#include "tandem/runtime/kernels.h"
#include "tandem/runtime/layers/activation.h"
#include "tandem/runtime/layers/activation_checkpoint.h"
#include "tandem/runtime/layers/batchnorm.h"
#include "tandem/runtime/layers/global_avg_pool.h"
#include "tandem/runtime/layers/attention.h"
#include "tandem/runtime/layers/conv2d.h"
#include "tandem/runtime/layers/dropout.h"
#include "tandem/runtime/layers/embedding.h"
#include "tandem/runtime/layers/flatten.h"
#include "tandem/runtime/layers/layer_util.h"
#include "tandem/runtime/layers/layernorm.h"
#include "tandem/runtime/layers/linear.h"
#include "tandem/runtime/layers/loss.h"
#include "tandem/runtime/layers/regression_loss.h"
#include "tandem/runtime/layers/info_nce.h"
#include "tandem/runtime/layers/maxpool2d.h"
#include "tandem/runtime/layers/tied_linear.h"
#include "tandem/runtime/layers/transformer_block.h"
#include "tandem/runtime/data/dataset.h"
#include "tandem/runtime/data/loader.h"
#include "tandem/runtime/data/sampler.h"
#include "tandem/runtime/data/text.h"
#include "tandem/runtime/optim/optimizer.h"
#include "tandem/runtime/strategy/strategy.h"
#include "tandem/runtime/strategy/parallel.h"
#include "tandem/runtime/layers/gather.h"
#include "tandem/runtime/checkpoint/checkpoint.h"
#include "tandem/runtime/trace.h"
#include "tandem/collectives/init.h"
#include "tandem/collectives/process_group.h"
#include "tandem/zoo/zoo.h"
#include "tandem/zoo/gpt.h"
#include "tandem/zoo/resnet.h"
#include "tandem/zoo/generate.h"
#include "tandem/runtime/strategy/summary.h"
