// The public API of tower: everything a program that trains its own model needs. The headers
// included here are the public ones; every other header under tower/ is internal and may change.
//
//   #include <tower/tower.h>
//   find_package(tower CONFIG REQUIRED)  ...  target_link_libraries(app PRIVATE tower::tower)
//
// docs/api.md says what each is for, how long objects live and which threads call what.
#pragma once

#include "tower/cli.h"                  // cli_main: the whole `tower` CLI for your models
#include "tower/core/device.h"          // Device, cpu_info, cpu_isa
#include "tower/core/error.h"           // Error: what every user mistake throws
#include "tower/core/tensor.h"          // Tensor, Shape, DType
#include "tower/data/dataset.h"         // Dataset, open_dataset, parse_dataset_spec
#include "tower/data/input_pipeline.h"  // InputPipeline: shuffle, transform, batch, prefetch
#include "tower/data/transforms.h"      // augmentation
#include "tower/graph/graph.h"          // Graph, Scope, Value, variables
#include "tower/io/checkpoint.h"        // checkpoint_save / checkpoint_load
#include "tower/models/model.h"         // ModelDef, ModelRegistrar, Recipe
#include "tower/models/model_file.h"    // models from JSON files
#include "tower/nn/layers.h"            // layers: conv2d, dense, batch_norm, pools, residual...
#include "tower/ops/activation.h"       // the ops a model function is written with
#include "tower/ops/batch_norm.h"
#include "tower/ops/bias.h"
#include "tower/ops/conv.h"
#include "tower/ops/dropout.h"
#include "tower/ops/lrn.h"
#include "tower/ops/math.h"
#include "tower/ops/matmul.h"
#include "tower/ops/nn_loss.h"
#include "tower/ops/pool.h"
#include "tower/parallel/data_parallel.h"  // DataParallel: towers over devices and ranks
#include "tower/train/ema.h"               // ExponentialMovingAverage
#include "tower/train/lr_schedule.h"       // learning-rate schedules
#include "tower/train/optimizer.h"         // DataParallelOptimizer
#include "tower/train/trainer.h"           // train(): the whole loop with checkpoints and logs
