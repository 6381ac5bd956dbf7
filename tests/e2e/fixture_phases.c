// SPDX-License-Identifier: MIT
/*
 * Load/inference shape with tags.
 *   phase "load":      under tag "weights": 40000 + 24000 bytes, kept.
 *                      load peak = 64000 (+ a 10000-byte scratch freed
 *                      inside load: peak 74000).
 *   phase "inference": 2 steps of kernel "step", each under tag
 *                      "activations": 3000 + 5000 bytes, both freed at the
 *                      end of the step. Inference peak = 64000 + 8000 = 72000.
 */
#include <stdlib.h>

#include <memprof.h>

int main(void)
{
	void *w1, *w2, *scratch;

	memprof_phase("load");
	memprof_tag_begin("weights");
	w1 = malloc(40000);
	w2 = malloc(24000);
	memprof_tag_end();
	scratch = malloc(10000);
	free(scratch);

	memprof_phase("inference");
	for (int s = 0; s < 2; s++) {
		void *a, *b;

		memprof_kernel_begin("step");
		memprof_tag_begin("activations");
		a = malloc(3000);
		b = malloc(5000);
		memprof_tag_end();
		free(a);
		free(b);
		memprof_kernel_end();
	}
	free(w1);
	free(w2);
	return 0;
}
