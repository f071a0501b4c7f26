use super::Secret;

#[test]
fn debug_never_shows_the_value() {
    let s = Secret::new("amqp://user:p@ss@host/");
    assert_eq!(format!("{s:?}"), "[redacted]");
    assert_eq!(s.expose(), "amqp://user:p@ss@host/");
}
