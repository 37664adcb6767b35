// Strata in the browser: read a subgraph file, feed it to an exported model in onnxruntime-web, and turn the
// logits into per-node predictions. No DOM here, so Node runs the same code (tests/web/node_predict.mjs).
//
// Subgraph format ("strata-subgraph" v1, docs/USAGE.md "In the browser"): subgraph.json, a header naming
// every array ({dtype, shape, offset, nbytes}) in subgraph.bin, a little-endian blob with each array at a
// 16-byte-aligned offset. Arrays: the ONNX inputs (x float32 (num_nodes, feature_dim); per layer i,
// edge_src_i / edge_dst_i / dst_pos_i int64), node_ids int64 (num_nodes,) (the dataset's ids) and labels
// int64 (num_seeds,) (-1 = unlabelled). The seeds are the first num_seeds nodes. A graph whose input named its
// nodes (string ids) adds header.node_names, the name of each of the num_nodes nodes.

export const SUBGRAPH_FORMAT = "strata-subgraph";
export const WEB_FORMAT = "strata-web";

const TYPED = { float32: Float32Array, int64: BigInt64Array, int32: Int32Array };

function check(cond, message) {
  if (!cond) throw new Error(message);
}

/** Parse a subgraph header (object) and its binary blob (ArrayBuffer) into {header, arrays}. */
export function parseSubgraph(header, blob) {
  check(header.format === SUBGRAPH_FORMAT,
    `'subgraph.json' expected format ${SUBGRAPH_FORMAT} (got ${header.format})`);
  check(header.format_version === 1, `'subgraph.json' expected format_version 1 (got ${header.format_version})`);
  check(header.byte_order === "little", `'subgraph.json' expected byte_order little (got ${header.byte_order})`);
  // typed arrays use the platform's byte order; every browser engine in use is little-endian, but say so
  check(new Uint8Array(new Uint16Array([1]).buffer)[0] === 1, "'subgraph.bin' needs a little-endian platform");
  check(blob.byteLength === header.data.bytes,
    `'${header.data.file}' expected ${header.data.bytes} bytes (got ${blob.byteLength})`);
  const arrays = {};
  for (const [name, spec] of Object.entries(header.arrays)) {
    const Typed = TYPED[spec.dtype];
    check(Typed !== undefined, `'subgraph.json' array ${name} expected dtype float32, int32 or int64 (got ${spec.dtype})`);
    const count = spec.shape.reduce((a, b) => a * b, 1);
    check(spec.nbytes === count * Typed.BYTES_PER_ELEMENT,
      `'subgraph.json' array ${name} expected nbytes ${count * Typed.BYTES_PER_ELEMENT} (got ${spec.nbytes})`);
    check(spec.offset % Typed.BYTES_PER_ELEMENT === 0 && spec.offset + spec.nbytes <= blob.byteLength,
      `'subgraph.json' array ${name} expected an aligned range inside subgraph.bin (got offset ${spec.offset})`);
    arrays[name] = new Typed(blob, spec.offset, count);
  }
  for (const name of header.inputs) check(name in arrays, `'subgraph.json' expected array ${name} (an ONNX input)`);
  return { header, arrays };
}

/** The onnxruntime feed {input name: ort.Tensor} of a parsed subgraph. */
export function makeFeeds(ort, subgraph) {
  const feeds = {};
  for (const name of subgraph.header.inputs) {
    const spec = subgraph.header.arrays[name];
    feeds[name] = new ort.Tensor(spec.dtype, subgraph.arrays[name], spec.shape);
  }
  return feeds;
}

/** Run ``session`` on ``subgraph``: logits (num_seeds x num_classes, Float32Array) and their dims. */
export async function runModel(ort, session, subgraph) {
  const out = await session.run(makeFeeds(ort, subgraph));
  const logits = out.logits;
  check(logits !== undefined, "'model' expected an output named logits");
  check(logits.dims[0] === subgraph.header.num_seeds,
    `'logits' expected ${subgraph.header.num_seeds} rows (the seeds) (got ${logits.dims[0]})`);
  return { data: Float32Array.from(logits.data), dims: logits.dims.slice() };
}

/** Per seed: {node, predicted, probability, label}, the probability by a numerically stable softmax; node is the
 * input's id (its name for a graph with named nodes). */
export function predictions(subgraph, logits) {
  const [rows, classes] = logits.dims;
  // a graph with named nodes (string ids) carries their names in the header; else the int64 ids are the input's
  const names = subgraph.header.node_names;
  const ids = subgraph.arrays.node_ids;
  const labels = subgraph.arrays.labels;
  const out = [];
  for (let r = 0; r < rows; r++) {
    const row = logits.data.subarray(r * classes, (r + 1) * classes);
    let best = 0;
    for (let c = 1; c < classes; c++) if (row[c] > row[best]) best = c;
    let sum = 0;
    for (let c = 0; c < classes; c++) sum += Math.exp(row[c] - row[best]);
    out.push({ node: names ? names[r] : Number(ids[r]), predicted: best, probability: 1 / sum, label: Number(labels[r]) });
  }
  return out;
}

/** Fetch-based loaders for the page (the URLs are relative to index.html). */
export async function fetchJson(url) {
  const response = await fetch(url);
  check(response.ok, `'${url}' expected HTTP 200 (got ${response.status})`);
  return response.json();
}

export async function fetchSubgraph(url) {
  const header = await fetchJson(url);
  const dataUrl = new URL(header.data.file, new URL(url, globalThis.location?.href)).href;
  const response = await fetch(dataUrl);
  check(response.ok, `'${header.data.file}' expected HTTP 200 (got ${response.status})`);
  return parseSubgraph(header, await response.arrayBuffer());
}
