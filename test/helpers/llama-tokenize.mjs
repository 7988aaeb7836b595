// node test/helpers/llama-tokenize.mjs MODEL.gguf TEXT → llama.cpp's token ids of TEXT as JSON (tests only).
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [model, text] = process.argv.slice(2);
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const loaded = await llama.loadModel({ modelPath: model });
process.stdout.write(JSON.stringify(loaded.tokenize(text)));
await llama.dispose();
