/* megatron.h — GPT training with Megatron-LM's PTD-P parallelism, header-only.
   (being written: see issue 3) */
#ifndef MEGATRON_H
#define MEGATRON_H
#include "mg_tensor.h"
#include "mg_comm.h"
#include "mg_pipeline.h"
#endif
