//! The sign-in memo's mechanics, step by step (no sockets, an explicit clock).

use futures::FutureExt;

use super::*;

fn stamp(session: &str) -> Stamp {
    Stamp { pem_sha256: [7; 32], session: session.into(), publish: "p".into() }
}

fn answer(reply: &[u8]) -> Answer {
    Answer { id: "m1".into(), reply: reply.to_vec(), stamp: stamp("s1") }
}

#[test]
fn an_identical_sign_in_joins_the_one_in_flight_and_later_ones_are_answered_from_memory() {
    let s = Arc::new(SignIns::default());
    let t0 = Instant::now();
    let Turn::Lead(lead) = s.turn([1; 32], t0) else { panic!("the first leads") };
    let Turn::Join(mut rx) = s.turn([1; 32], t0) else { panic!("a copy in flight joins") };
    assert!(matches!(s.turn([2; 32], t0), Turn::Lead(_)), "another request is its own");
    assert!(rx.borrow().is_none());
    // It took 8 s from its arrival (a storm's queue): kept 8 s and the slack after.
    let answered = t0 + Duration::from_secs(8);
    lead.answered(answer(b"reply"), t0, answered);
    assert!(rx.changed().now_or_never().is_some_and(|r| r.is_ok()), "the joined copy is woken");
    assert_eq!(rx.borrow().as_ref().map(|a| a.reply.clone()), Some(b"reply".to_vec()));
    let Turn::Cached(a) = s.turn([1; 32], answered + Duration::from_secs(9)) else { panic!("a copy queued behind it is answered from memory") };
    assert_eq!(a.reply, b"reply");
    assert!(matches!(s.turn([1; 32], answered + Duration::from_secs(8) + SLACK + Duration::from_millis(1)), Turn::Lead(_)), "forgotten once no copy can come");
}

#[test]
fn a_quick_sign_in_is_kept_only_for_the_slack() {
    let s = Arc::new(SignIns::default());
    let t0 = Instant::now();
    let Turn::Lead(lead) = s.turn([1; 32], t0) else { panic!() };
    let answered = t0 + Duration::from_millis(3);
    lead.answered(answer(b"reply"), t0, answered);
    // Kept the 3 ms it took and the slack.
    let due = answered + Duration::from_millis(3) + SLACK;
    assert!(matches!(s.turn([1; 32], due - Duration::from_millis(1)), Turn::Cached(_)), "a copy on its way as the reply went out");
    // No sign-in comes: the sweep drops it when due.
    s.sweep(due - Duration::from_millis(1));
    assert_eq!(s.answers(), 1, "not before it is due");
    s.sweep(due);
    assert_eq!(s.answers(), 0);
    assert_eq!(keep_for(Duration::from_secs(600)), WINDOW, "never past the window");
}

#[test]
fn a_lead_that_gives_up_releases_those_waiting() {
    let s = Arc::new(SignIns::default());
    let t0 = Instant::now();
    let Turn::Lead(lead) = s.turn([1; 32], t0) else { panic!() };
    let Turn::Join(mut rx) = s.turn([1; 32], t0) else { panic!() };
    drop(lead);
    assert!(rx.changed().now_or_never().is_some_and(|r| r.is_err()), "no answer will come");
    assert!(rx.borrow().is_none());
    assert!(matches!(s.turn([1; 32], t0), Turn::Lead(_)), "the next copy is handled");
    assert_eq!(s.answers(), 0);
}

#[test]
fn answers_kept_are_bounded() {
    let s = Arc::new(SignIns::default());
    let t0 = Instant::now();
    for i in 0..(MAX_ANSWERS + 100) as u32 {
        let mut k = [0u8; 32];
        k[..4].copy_from_slice(&i.to_le_bytes());
        let Turn::Lead(lead) = s.turn(k, t0) else { panic!() };
        lead.answered(answer(b"r"), t0, t0 + Duration::from_micros(i.into()));
    }
    assert!(s.answers() <= MAX_ANSWERS + 1, "{} kept", s.answers());
    assert!(matches!(s.turn([0; 32], t0), Turn::Lead(_)), "the first due went first");
}
