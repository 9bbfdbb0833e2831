/* What attnsuite's decode kernels share (decode.c, steps.c). */
#ifndef ATTNSUITE_NATIVE_COMMON_H
#define ATTNSUITE_NATIVE_COMMON_H

#define HIDDEN (-1.0e30f) /* a masked key's score: finite (the sources are compiled with -ffast-math), exp() of it is 0 */

#endif
