// Precompiled header: the LibTorch headers that most Strata translation units need. Compiled
// once per set of flags (see cmake/StrataCompiler.cmake); never include this file directly.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules.h>
#include <torch/nn/functional.h>
#include <torch/optim.h>
#include <torch/types.h>
#include <ATen/ATen.h>
