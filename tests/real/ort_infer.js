// SPDX-License-Identifier: MIT
// Fixture of tests/real/test_real.c: onnxruntime-node (found through
// NODE_PATH) runs the ONNX file argv[2] (export_onnx.py's CNN) on the CPU
// for argv[3] (default 5) inference passes.
'use strict';
const ort = require('onnxruntime-node');

async function main() {
  const model = process.argv[2];
  const passes = Number(process.argv[3] || 5);
  const shape = [1, 3, 112, 112];
  const data = new Float32Array(shape.reduce((a, b) => a * b));
  for (let i = 0; i < data.length; i++)
    data[i] = ((i * 7919) % 1000) / 500 - 1;
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: 2,
    interOpNumThreads: 1,
  });
  let out;
  for (let i = 0; i < passes; i++)
    out = await session.run({ input: new ort.Tensor('float32', data, shape) });
  process.stdout.write(`ort_infer.js: done ${passes} passes [${out.output.dims}]\n`);
}

main().catch((e) => {
  process.stderr.write(`ort_infer.js: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
