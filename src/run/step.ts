// A decode step compiled once for a backend: the eager closures, and the plan recorded natively on first use.
import type { Backend, RecordedStep } from "../backends/backend.ts";
import { compileEager, encodePlan, type PlanOp } from "../plan.ts";

export class CompiledStep {
  readonly eagerCalls: Array<() => void>;
  private recorded: RecordedStep | null = null;

  constructor(
    readonly backend: Backend,
    readonly ops: PlanOp[],
  ) {
    this.eagerCalls = compileEager(ops, backend.ops);
  }

  /** TypeScript walks the plan, one FFI call per op */
  runEager(): void {
    const calls = this.eagerCalls;
    for (let i = 0; i < calls.length; i++) calls[i]!();
  }

  /** the plan recorded natively once (and captured as a graph on CUDA when first replayed) */
  native(): RecordedStep {
    this.recorded ??= this.backend.record(encodePlan(this.ops));
    return this.recorded;
  }

  destroy(): void {
    this.recorded?.destroy();
    this.recorded = null;
  }
}
