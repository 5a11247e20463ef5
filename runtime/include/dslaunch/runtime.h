// Installed entry point of the dslaunch runtime API: see runtime/api/dslaunch_runtime.h.
#pragma once
#include "runtime/api/dslaunch_runtime.h"
