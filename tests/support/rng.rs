//! A tiny deterministic generator for the tests' plans (no dependency):
//! the same seed makes the same plan every run, so a failure reproduces.

/// A linear congruential generator (Knuth's MMIX constants).
pub struct Lcg(pub u64);

impl Lcg {
    /// The next draw (the state's high 31 bits).
    pub fn draw(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// A whole number of seconds in `lo..=hi`.
    pub fn secs(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.draw() % (hi - lo + 1)
    }
}
