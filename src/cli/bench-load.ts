// The competing program of `bun run bench cpu --contend N`: N threads of busy floating-point work in a
// process of its own, as another program on the same cores would be. Prints "ready" once every thread
// spins; exits when its parent goes away or after MAX_SECONDS, so it can never outlive the bench.
const MAX_SECONDS = 600;

const threads = Number(process.argv[2]);
if (!Number.isInteger(threads) || threads < 1) {
  process.stderr.write(`error: bench-load needs a thread count ≥ 1 (got ${process.argv[2]})\n`);
  process.exit(1);
}

const SPIN = `
  postMessage("spinning");
  let x = 1.0;
  for (;;) for (let i = 0; i < 1e7; i++) x = x * 1.0000001 + 1e-9;
`;
const url = URL.createObjectURL(new Blob([SPIN], { type: "application/javascript" }));
let spinning = 0;
for (let i = 0; i < threads; i++) {
  const worker = new Worker(url);
  worker.onmessage = () => {
    if (++spinning === threads) process.stdout.write("ready\n");
  };
}

const parent = process.ppid;
const started = Date.now();
setInterval(() => {
  if (process.ppid !== parent || Date.now() - started > MAX_SECONDS * 1e3) process.exit(0);
}, 100);
