export { DeviceArena, freshSeed } from "../../src/verify/arena.ts";
