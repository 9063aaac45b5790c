//! Greedy shrinking, shared by the labs' differential tests (lab 1's
//! `deliver_once/differential.rs`, the courier's `courier/differential.rs`): from a
//! failing input, take the first simpler input that still fails, again and again,
//! until no simpler input fails or the budget of tries is spent.

/// The smallest failing input found from `input` (which fails with `failure`), its
/// failure, and how many simplifications led there. `simpler` gives the inputs one
/// step simpler than one; `fails` runs a candidate and gives its failure, or None when
/// it does not fail. At most `budget` candidates are run.
pub fn shrink<I, F>(
    mut input: I,
    mut failure: F,
    budget: usize,
    simpler: impl Fn(&I) -> Vec<I>,
    mut fails: impl FnMut(&I) -> Option<F>,
) -> (I, F, usize) {
    let (mut tries, mut steps) = (0, 0);
    'simplify: while tries < budget {
        for candidate in simpler(&input) {
            tries += 1;
            if let Some(f) = fails(&candidate) {
                (input, failure) = (candidate, f);
                steps += 1;
                continue 'simplify;
            }
            if tries >= budget {
                break;
            }
        }
        break;
    }
    (input, failure, steps)
}
