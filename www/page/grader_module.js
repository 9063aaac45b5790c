// Each lab has a grader module of its own (pkg/labs/ID/, built by
// scripts/build-wasm.sh): the page and its worker load only their lab's.

/**
 * Imports and initialises the grader module of `labId` found under `base` (the
 * URL of the page, or of the worker); resolves to the module ({ Grader, ... }).
 */
export async function loadLabGrader(labId, base) {
  if (!/^[a-z0-9-]+$/.test(labId)) throw new Error(`there is no lab "${labId}" here`);
  const dir = new URL(`pkg/labs/${labId}/`, base);
  const pkg = await import(new URL('delivery_lab.js', dir).href);
  await pkg.default({ module_or_path: new URL('delivery_lab_bg.wasm', dir) });
  return pkg;
}
