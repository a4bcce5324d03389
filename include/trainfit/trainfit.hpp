#pragma once
// The public API of the trainfit library.
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/model.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/report.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/setup.hpp"
#include "trainfit/telemetry.hpp"
#include "trainfit/units.hpp"
#include "trainfit/measurements.hpp"
#include "trainfit/time.hpp"
