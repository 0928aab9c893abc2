// Precompiled header: the LibTorch headers that most Strata translation units need. Compiled
// once per set of flags (see cmake/StrataCompiler.cmake); never include this file directly.
//
// Kept lean on purpose. GCC loads a precompiled header whole and, in every translation unit that
// uses it, finishes the template instantiations and inline functions the header left pending: the
// larger the header, the more each unit pays, whether it uses them or not. With torch/nn/modules.h,
// functional.h and optim.h added here (a 719 MB header) a 30-line strategy plugin compiled in 15.7 s
// and an 8-line one in 7.2 s; with these three (528 MB), 7.5 s and 4.9 s. Sources that build
// modules or use the functional API include those headers themselves.
#pragma once
#include <torch/nn/module.h>
#include <torch/types.h>
#include <ATen/ATen.h>
