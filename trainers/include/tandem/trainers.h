#pragma once
// trainers: CSV, tensor and text data sets, standardization, loaders, the Trainer, its callbacks and checkpoints, the
// GPT and its LanguageModelTrainer.

#include "tandem/trainers/callback.h"
#include "tandem/trainers/callbacks.h"
#include "tandem/trainers/checkpoint.h"
#include "tandem/trainers/classification.h"
#include "tandem/trainers/csv.h"
#include "tandem/trainers/datasets.h"
#include "tandem/trainers/distributed_sampler.h"
#include "tandem/trainers/gpt.h"
#include "tandem/trainers/language_model.h"
#include "tandem/trainers/loader.h"
#include "tandem/trainers/lr_schedule.h"
#include "tandem/trainers/metrics.h"
#include "tandem/trainers/models.h"
#include "tandem/trainers/process_devices.h"
#include "tandem/trainers/standardize.h"
#include "tandem/trainers/svg_chart.h"
#include "tandem/trainers/table_dataset.h"
#include "tandem/trainers/tensor_dataset.h"
#include "tandem/trainers/text_dataset.h"
#include "tandem/trainers/trainer.h"
