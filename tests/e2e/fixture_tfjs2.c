// SPDX-License-Identifier: MIT
/*
 * C port of tf.profile's second example:
 *
 *   const a = tf.tensor2d([1, 2], [1, 2]);
 *   const b = tf.tensor2d([1, 2, 3, 4], [2, 2]);
 *   const c = a.matMul(b);
 *   return c;
 */
#include <stdint.h>
#include <stdlib.h>

#include <memprof.h>

static float *tensor(const float *v, size_t n)
{
	float *t = malloc(n * sizeof(float));

	if (t)
		for (size_t i = 0; i < n; i++)
			t[i] = v[i];
	return t;
}

int main(void)
{
	static const float av[] = { 1, 2 }, bv[] = { 1, 2, 3, 4 };
	const int64_t ashape[] = { 1, 2 }, bshape[] = { 2, 2 }, cshape[] = { 1, 2 };
	float *a, *b, *c;

	memprof_kernel_begin("profile");
	a = tensor(av, 2);
	b = tensor(bv, 4);
	if (!a || !b)
		return 1;

	memprof_kernel_begin("matMul");
	memprof_kernel_input_shape(ashape, 2);
	memprof_kernel_input_shape(bshape, 2);
	c = malloc(2 * sizeof(float));
	if (!c)
		return 1;
	c[0] = a[0] * b[0] + a[1] * b[2];
	c[1] = a[0] * b[1] + a[1] * b[3];
	memprof_kernel_output_shape(cshape, 2);
	memprof_kernel_end();
	memprof_kernel_end();

	free(a);
	free(b);
	free(c);
	return 0;
}
