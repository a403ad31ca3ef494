// Tandem's collectives alone: the process group over mpi, gloo or nccl and the store, for
// a program that moves its own buffers (examples/allreduce).
//   #include <tandem/collectives.h>       target_link_libraries(app PRIVATE Tandem::collectives)
// init_process_group() reads the environment tandemrun or mpirun sets (collectives/init.h);
// every op returns a Work to wait on (collectives/work.h); buffers are typed spans of host
// memory, or of GPU memory on nccl (collectives/types.h).
#pragma once

#include "tandem/version.h"

#include "tandem/collectives/init.h"
#include "tandem/collectives/process_group.h"
#include "tandem/collectives/types.h"
#include "tandem/collectives/work.h"
