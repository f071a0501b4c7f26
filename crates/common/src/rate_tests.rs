use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::{Bucket, Buckets, Rate};

#[test]
fn a_burst_is_let_through_then_the_rate_and_the_wait_is_told() {
    let (rate, t0) = (Rate::new(10, 3), Instant::now());
    let mut b = Bucket::full(rate, t0);
    for _ in 0..3 {
        assert_eq!(b.take(rate, t0), Ok(()));
    }
    let wait = b.take(rate, t0).expect_err("the burst is spent");
    assert!(wait > Duration::from_millis(90) && wait <= Duration::from_millis(100));
    // A tenth of a second later one token is back, and only one.
    let t1 = t0 + Duration::from_millis(100);
    assert_eq!(b.take(rate, t1), Ok(()));
    assert!(b.take(rate, t1).is_err());
    // A long quiet spell refills to the burst, no more.
    let t2 = t1 + Duration::from_secs(60);
    for _ in 0..3 {
        assert_eq!(b.take(rate, t2), Ok(()));
    }
    assert!(b.take(rate, t2).is_err());
}

#[test]
fn each_key_has_its_own_bucket() {
    let (rate, t0) = (Rate::new(1, 1), Instant::now());
    let buckets: Buckets<String> = Buckets::default();
    assert_eq!(buckets.take("a", rate, t0), Ok(()));
    assert!(buckets.take("a", rate, t0).is_err());
    assert_eq!(buckets.take("b", rate, t0), Ok(()));
    assert_eq!(buckets.len(), 2);
}

#[test]
fn zero_is_read_as_one() {
    assert_eq!(Rate::new(0, 0), Rate::new(1, 1));
}

proptest! {
    /// Over any schedule of takes, no more pass than the burst plus what
    /// the rate added over the span, and a refused take's wait is at most
    /// one token's time.
    #[test]
    fn never_more_than_the_burst_plus_the_rate(
        per_second in 1u32..500,
        burst in 1u32..200,
        gaps_ms in proptest::collection::vec(0u64..50, 1..400),
    ) {
        let rate = Rate::new(per_second, burst);
        let t0 = Instant::now();
        let mut b = Bucket::full(rate, t0);
        let (mut now, mut passed) = (t0, 0u64);
        for gap in gaps_ms {
            now += Duration::from_millis(gap);
            match b.take(rate, now) {
                Ok(()) => passed += 1,
                Err(wait) => prop_assert!(wait <= Duration::from_secs_f64(1.0 / f64::from(per_second)) + Duration::from_micros(1)),
            }
        }
        let span = now.duration_since(t0).as_secs_f64();
        let most = f64::from(burst) + span * f64::from(per_second);
        prop_assert!(passed as f64 <= most + 1e-6, "{passed} passed, at most {most}");
    }
}
