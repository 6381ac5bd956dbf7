// SPDX-License-Identifier: MIT
/*
 * C port of tf.profile's first example (tfjs PR "Memory profiling"):
 *
 *   const x = tf.tensor1d([1, 2, 3]);
 *   let x2 = x.square(); x2.dispose();
 *   x2 = x.square(); x2.dispose();
 *   return x;
 *
 * float32 tensors are malloc'd blocks; the profiled region is the outer
 * kernel "profile". Nothing else allocates inside it.
 */
#include <stdint.h>
#include <stdlib.h>

#include <memprof.h>

static float *square(const float *x, int64_t n)
{
	float *y;

	memprof_kernel_begin("square");
	memprof_kernel_input_shape(&n, 1);
	y = malloc((size_t)n * sizeof(float));
	if (y)
		for (int64_t i = 0; i < n; i++)
			y[i] = x[i] * x[i];
	memprof_kernel_output_shape(&n, 1);
	memprof_kernel_end();
	return y;
}

int main(void)
{
	const int64_t n = 3;
	float *x, *x2;

	memprof_kernel_begin("profile");
	x = malloc(n * sizeof(float));
	if (!x)
		return 1;
	x[0] = 1, x[1] = 2, x[2] = 3;
	x2 = square(x, n);
	free(x2);
	x2 = square(x, n);
	free(x2);
	memprof_kernel_end();

	free(x);
	return 0;
}
