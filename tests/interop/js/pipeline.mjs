// transformers.js, offline, on model directories under ROOT; prints the result as JSON for
// tests/test_onnx_interop.py to compare with roberta's own outputs:
//   node pipeline.mjs ROOT NAME TASK INPUTS_JSON [OPTIONS_JSON]
// TASK is a pipeline task (`pipeline(TASK, NAME)`, OPTIONS its call's, plus `dtype`: "q8" reads
// onnx/model_quantized.onnx), or "tokenize": the ids of each input text by NAME's tokenizer.
import { AutoTokenizer, env, pipeline } from "@huggingface/transformers";

const [root, name, task, inputs, options = "{}"] = process.argv.slice(2);
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = root;
const { dtype = "fp32", ...call } = JSON.parse(options);
let output;
if (task === "tokenize") {
  const tokenizer = await AutoTokenizer.from_pretrained(name);
  output = JSON.parse(inputs).map((text) => tokenizer.encode(text));
} else {
  const run = await pipeline(task, name, { dtype });
  output = await run(JSON.parse(inputs), call);
}
console.log(JSON.stringify(output.tolist ? output.tolist() : output));
