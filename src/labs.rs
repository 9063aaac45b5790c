// The labs, in course order: each one's id, its module (the folder `src/<module>/`)
// and the type implementing `Lab`. This list is the one place the labs are named:
// the engine (src/lib.rs), the build of their cases (build.rs), and through them the
// WASM boundary, the page, the CLI and scripts/labs all learn the labs from it.
// Adding a lab is one line here (README.md, "Adding a lab").
labs! {
    "deliver-once" => deliver_once::DeliverOnce,
    "courier" => courier::Courier,
}
