// The WebAssembly target of `python -m harness deploy` (harness/studies/deploy_wasm.py): one ONNX graph run in
// onnxruntime-web's wasm backend under Node, at each case's inputs.
//   node run_onnx.mjs PREFIX JOB.json   PREFIX: the folder `npm ci` installed this folder's package-lock.json into
// JOB.json: {"model": path, "repeats": n, "budget_s": s, "cases": [{"inputs": {name: {"file", "dims"}}, "output"}]}
// with float32 inputs as raw little-endian files. Writes each case's output as raw float32 to its "output" file
// and prints one JSON line: {"version", "cases": [{"latency_s" (median), "repeats", "dims"}]} or {"error": "..."}.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

async function main(prefix, jobPath) {
  const job = JSON.parse(readFileSync(jobPath, "utf8"));
  const require = createRequire(join(prefix, "package.json"));
  const ort = await import(pathToFileURL(require.resolve("onnxruntime-web")).href);
  ort.env.wasm.numThreads = 1; // one thread: a page without cross-origin isolation gets no more
  const packageFile = join(prefix, "node_modules", "onnxruntime-web", "package.json");
  const version = JSON.parse(readFileSync(packageFile, "utf8")).version;
  const session = await ort.InferenceSession.create(readFileSync(job.model), { executionProviders: ["wasm"] });
  const cases = [];
  for (const item of job.cases) {
    const feeds = {};
    for (const [name, input] of Object.entries(item.inputs)) {
      const bytes = readFileSync(input.file);
      const data = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
      feeds[name] = new ort.Tensor("float32", data, input.dims);
    }
    let out = await session.run(feeds); // the untimed first call
    const times = [];
    const start = performance.now();
    while (times.length < job.repeats || (performance.now() - start < 1000 * job.budget_s && times.length < 1000)) {
      const t = performance.now();
      out = await session.run(feeds);
      times.push((performance.now() - t) / 1000);
    }
    const result = out[session.outputNames[0]];
    writeFileSync(item.output, Buffer.from(result.data.buffer, result.data.byteOffset, result.data.byteLength));
    times.sort((a, b) => a - b);
    cases.push({ latency_s: times[Math.floor(times.length / 2)], repeats: times.length, dims: result.dims });
  }
  return { version, cases };
}

main(...process.argv.slice(2)).then(
  (result) => console.log(JSON.stringify(result)),
  (error) => console.log(JSON.stringify({ error: String(error?.message ?? error) })),
);
