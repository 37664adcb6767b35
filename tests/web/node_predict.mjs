// Run exported models in onnxruntime-web (WASM backend) under Node, through web/strata.mjs (the page's code).
// Usage: node node_predict.mjs ORT_WEB_PACKAGE_DIR SUBGRAPH_JSON MODEL.onnx [MODEL.onnx ...]
// Prints one JSON object: {backend, results: [{model, dims, logits, predicted}]}.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const [ortDir, subgraphJson, ...models] = process.argv.slice(2);
const here = path.dirname(fileURLToPath(import.meta.url));
const strata = await import(pathToFileURL(path.join(here, "..", "..", "web", "strata.mjs")).href);
const ort = createRequire(path.join(ortDir, "package.json"))(ortDir);  // the package's Node (CommonJS) entry
ort.env.wasm.numThreads = 1;  // as the page runs without cross-origin isolation

const header = JSON.parse(readFileSync(subgraphJson, "utf8"));
const bytes = readFileSync(path.join(path.dirname(subgraphJson), header.data.file));
const subgraph = strata.parseSubgraph(header, bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
const results = [];
for (const model of models) {
  const session = await ort.InferenceSession.create(readFileSync(model), { executionProviders: ["wasm"] });
  const logits = await strata.runModel(ort, session, subgraph);
  results.push({ model, dims: logits.dims, logits: Array.from(logits.data),
                 predicted: strata.predictions(subgraph, logits).map((p) => p.predicted) });
  await session.release();
}
console.log(JSON.stringify({ backend: "wasm", results }));
