#include "device/testing/kernels.h"
