/* mg_pipeline.h — pipeline schedules as lists of actions, their executor and simulator.
   (being written: see issue 6) */
#ifndef MG_PIPELINE_H
#define MG_PIPELINE_H
#include "mg_comm.h"
#endif
