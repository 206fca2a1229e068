//! `SocketOptions::max_message_size`: a declared length past the bound is refused from
//! the frame header, before the decoder reserves anything for the frame.
use super::*;

fn codec(max: usize) -> ZmqCodec {
    let mut options = SocketOptions::default();
    options.max_message_size(max);
    let mut codec = ZmqCodec::with_options(&options);
    codec.state = DecoderState::FrameHeader;
    codec.waiting_for = 1;
    codec
}

fn long_header(flags: u8, len: u64) -> Vec<u8> {
    let mut h = vec![flags | 0b10];
    h.extend_from_slice(&len.to_be_bytes());
    h
}

#[test]
fn a_huge_declared_frame_is_refused_before_any_reservation() {
    let mut codec = codec(1 << 20);
    // The 9-byte header that used to make the decoder reserve 1 TiB.
    let mut input = BytesMut::from(long_header(0, 1 << 40).as_slice());
    let capacity = input.capacity();
    match codec.decode(&mut input) {
        Err(CodecError::MessageTooLarge { size, max }) => {
            assert_eq!(max, 1 << 20);
            assert!(size > 1 << 40);
        }
        other => panic!("expected MessageTooLarge, got {other:?}"),
    }
    // The header was consumed and nothing was reserved for the frame's body.
    assert!(input.capacity() <= capacity, "{} > {capacity}", input.capacity());
}

#[test]
fn u64_max_and_command_frames_are_refused() {
    let mut input = BytesMut::from(long_header(0, u64::MAX).as_slice());
    assert!(matches!(codec(1024).decode(&mut input), Err(CodecError::MessageTooLarge { .. })));
    let mut input = BytesMut::from(long_header(0b100, 4096).as_slice());
    assert!(matches!(codec(1024).decode(&mut input), Err(CodecError::MessageTooLarge { .. })));
}

#[test]
fn a_message_within_the_bound_decodes() {
    let mut codec = codec(300 + FRAME_OVERHEAD);
    let mut input = BytesMut::from(long_header(0, 300).as_slice());
    input.extend_from_slice(&[7u8; 300]);
    let Some(Message::Message(m)) = codec.decode(&mut input).unwrap() else { panic!("one message") };
    assert_eq!(m.get(0).unwrap().len(), 300);
    // The bound is per message: the next one may be as large again.
    let mut input = BytesMut::from(long_header(0, 300).as_slice());
    input.extend_from_slice(&[7u8; 300]);
    assert!(matches!(codec.decode(&mut input), Ok(Some(Message::Message(_)))));
}

#[test]
fn the_frames_of_one_message_add_up() {
    // Two 200-byte frames under a 300-byte bound: the second header is refused.
    let mut codec = codec(300);
    let mut input = BytesMut::from(long_header(1, 200).as_slice());
    input.extend_from_slice(&[1u8; 200]);
    input.extend_from_slice(&long_header(0, 200));
    assert!(matches!(codec.decode(&mut input), Err(CodecError::MessageTooLarge { .. })));
}

#[test]
fn many_empty_frames_are_bounded_too() {
    let mut codec = codec(100 * FRAME_OVERHEAD);
    let mut input = BytesMut::from([1u8, 0].repeat(1000).as_slice());
    input.extend_from_slice(&[0, 0]);
    assert!(matches!(codec.decode(&mut input), Err(CodecError::MessageTooLarge { .. })));
}

#[test]
fn unbounded_by_default() {
    let mut codec = ZmqCodec::new();
    codec.state = DecoderState::FrameHeader;
    codec.waiting_for = 1;
    let mut input = BytesMut::from(long_header(0, 1 << 20).as_slice());
    assert!(matches!(codec.decode(&mut input), Ok(None)), "waits for the body");
}
