// The page: read web.json (the export's manifest), load onnxruntime-web, run the chosen model variant on the
// exported subgraph and fill the predictions table. ?variant=fp16 picks a variant from the URL.
import { fetchJson, fetchSubgraph, predictions, runModel, WEB_FORMAT } from "./strata.mjs";

const $ = (id) => document.getElementById(id);

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text;
  row.appendChild(td);
}

async function loadRuntime(manifest) {
  const errors = [];
  for (const base of ["./ort/", manifest.onnxruntime_web.cdn]) {
    const url = new URL(base, location.href).href;
    try {
      const ort = await import(url + manifest.onnxruntime_web.entry);
      ort.env.wasm.wasmPaths = url;
      ort.env.wasm.numThreads = globalThis.crossOriginIsolated ? 0 : 1;  // threads need cross-origin isolation
      return { ort, source: url };
    } catch (e) {
      errors.push(`${url}: ${e.message}`);
    }
  }
  throw new Error(`onnxruntime-web could not be loaded (${errors.join("; ")})`);
}

function showVariants(manifest) {
  const body = $("variants").tBodies[0];
  for (const v of manifest.variants) {
    const row = body.insertRow();
    cell(row, v.name);
    cell(row, v.file);
    cell(row, v.bytes.toLocaleString());
    cell(row, v.val_acc.toFixed(4));
    cell(row, (v.val_acc_delta >= 0 ? "+" : "") + v.val_acc_delta.toFixed(4));
    $("variant").add(new Option(v.name, v.name));
  }
}

async function run(manifest, runtime, subgraph, name) {
  document.body.dataset.state = "loading";
  const variant = manifest.variants.find((v) => v.name === name);
  if (variant === undefined) throw new Error(`'variant' expected one of ${manifest.variants.map((v) => v.name)} (got ${name})`);
  $("status").textContent = `Running ${variant.file}…`;
  const start = performance.now();
  const session = await runtime.ort.InferenceSession.create(variant.file, { executionProviders: ["wasm"] });
  const logits = await runModel(runtime.ort, session, subgraph);
  const ms = performance.now() - start;
  await session.release();
  const rows = predictions(subgraph, logits);
  const body = $("predictions").tBodies[0];
  body.replaceChildren();
  let correct = 0, labelled = 0;
  for (const p of rows) {
    const row = body.insertRow();
    row.dataset.node = p.node;
    row.dataset.predicted = p.predicted;
    row.dataset.probability = p.probability;
    if (p.label >= 0) {
      labelled += 1;
      correct += p.label === p.predicted ? 1 : 0;
      if (p.label !== p.predicted) row.className = "wrong";
    }
    cell(row, p.node);
    cell(row, p.predicted);
    cell(row, p.probability.toFixed(4));
    cell(row, p.label >= 0 ? p.label : "");
  }
  $("status").textContent = `${variant.name}: ${rows.length} nodes, ${correct}/${labelled} correct, `
    + `${ms.toFixed(0)} ms (session + inference), onnxruntime-web from ${runtime.source}`;
  document.body.dataset.variant = variant.name;
  document.body.dataset.state = "done";
}

async function main() {
  const manifest = await fetchJson("web.json");
  if (manifest.format !== WEB_FORMAT) throw new Error(`'web.json' expected format ${WEB_FORMAT} (got ${manifest.format})`);
  $("about").textContent = `${manifest.model_name}: ${manifest.architecture} on ${manifest.dataset}, `
    + `${manifest.num_seeds} validation nodes of a sampled ${manifest.num_layers}-layer subgraph `
    + `(${manifest.num_nodes} nodes).`;
  showVariants(manifest);
  const [runtime, subgraph] = await Promise.all([loadRuntime(manifest), fetchSubgraph(manifest.subgraph)]);
  const chosen = new URLSearchParams(location.search).get("variant") ?? manifest.default_variant;
  $("variant").value = chosen;
  $("variant").addEventListener("change", (e) => run(manifest, runtime, subgraph, e.target.value).catch(fail));
  await run(manifest, runtime, subgraph, chosen);
}

function fail(e) {
  $("status").textContent = `Error: ${e.message}`;
  $("status").className = "error";
  document.body.dataset.state = "error";
  document.body.dataset.error = e.message;
}

main().catch(fail);
