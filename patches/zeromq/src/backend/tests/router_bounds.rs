//! ROUTER with `send_queue_capacity` and `send_queue_bytes`: a peer's queue is bounded
//! by count and by bytes, a full queue gives the message back at once, and without the
//! options nothing changes.

use super::*;

fn router_with_capacity(capacity: usize) -> GenericSocketBackend {
    let mut options = SocketOptions::default();
    options.send_queue_capacity(capacity);
    GenericSocketBackend::with_options(None, SocketType::ROUTER, options)
}

async fn insert_bounded_peer(
    backend: &GenericSocketBackend,
    peer_id: &str,
) -> (PeerIdentity, mpsc::Receiver<Message>) {
    let peer_id: PeerIdentity = peer_id.parse().expect("peer id");
    let (send_queue, recv_queue) = peer_send_queue(backend.bounded_peer_queues());
    let queued_bytes = backend
        .socket_options
        .send_queue_bytes
        .map(|_| Arc::new(AtomicUsize::new(0)));
    backend
        .peers
        .upsert_async(
            peer_id.clone(),
            Peer {
                send_queue,
                queued_bytes,
            },
        )
        .await;
    backend.refresh_single_peer_cache();
    (peer_id, recv_queue)
}

fn queued_bytes(backend: &GenericSocketBackend, peer_id: &PeerIdentity) -> usize {
    backend
        .peers
        .read_sync(peer_id, |_, peer| {
            peer.queued_bytes
                .as_ref()
                .map_or(0, |b| b.load(Ordering::Acquire))
        })
        .expect("peer")
}

#[crate::async_rt::test]
async fn test_router_send_queue_bytes_bounds_a_peers_queue_by_bytes() {
    let mut options = SocketOptions::default();
    options.send_queue_capacity(100).send_queue_bytes(10);
    let backend = GenericSocketBackend::with_options(None, SocketType::ROUTER, options);
    let (peer_id, mut recv_queue) = insert_bounded_peer(&backend, "bytes").await;
    let four = || message_with_frame(b"four");
    backend.send_to_peer(&peer_id, four()).await.expect("4 of 10");
    backend.send_to_peer(&peer_id, four()).await.expect("8 of 10");
    assert!(matches!(
        backend.send_to_peer(&peer_id, four()).await,
        Err(ZmqError::ReturnToSender { .. })
    ));
    assert_eq!(8, queued_bytes(&backend, &peer_id));

    // The writer takes the bytes off as it takes the messages (`write_message_queue`).
    let (writer_tx, writer_rx) = futures::channel::oneshot::channel();
    let counter = backend
        .peers
        .read_sync(&peer_id, |_, peer| peer.queued_bytes.clone())
        .flatten()
        .expect("a byte count");
    let (mut forward, forwarded) = mpsc::channel(8);
    for message in drain(&mut recv_queue) {
        forward
            .try_send(Message::Message(ZmqMessage::from(message)))
            .expect("forward");
    }
    drop(forward);
    let sink = crate::codec::ZmqFramedWrite::new(
        Box::new(futures::io::sink()),
        crate::codec::ZmqCodec::new(),
    );
    crate::async_rt::task::spawn(async move {
        let _ = writer_tx.send(write_message_queue(forwarded, sink, false, Some(counter)).await);
    });
    writer_rx.await.expect("writer").expect("written");
    assert_eq!(0, queued_bytes(&backend, &peer_id));

    // A message larger than the bound goes when the queue is empty.
    let big = Message::Message(ZmqMessage::from(Bytes::from(vec![0u8; 50])));
    backend.send_to_peer(&peer_id, big).await.expect("alone");
    assert_eq!(50, queued_bytes(&backend, &peer_id));
    assert!(matches!(
        backend.send_to_peer(&peer_id, message_with_frame(b"x")).await,
        Err(ZmqError::ReturnToSender { .. })
    ));
}

fn drain(recv_queue: &mut mpsc::Receiver<Message>) -> Vec<Bytes> {
    std::iter::from_fn(|| recv_queue.try_recv().ok().map(first_frame)).collect()
}

#[crate::async_rt::test]
async fn test_router_send_to_a_peer_whose_queue_is_full_gives_the_message_back() {
    let backend = router_with_capacity(3);
    let (peer_id, mut recv_queue) = insert_bounded_peer(&backend, "never-reads").await;
    // One peer: the single-peer cache is set, and must not add room of its own.
    assert!(backend.single_peer.lock().is_some());

    for i in 0..10u8 {
        let frame = Bytes::from(vec![i]);
        let sent = backend
            .send_to_peer(&peer_id, Message::Message(ZmqMessage::from(frame.clone())))
            .await;
        match sent {
            Ok(()) => assert!(i < 3, "message {i} queued past the capacity"),
            Err(ZmqError::ReturnToSender { message, .. }) => {
                assert!(i >= 3, "message {i} refused below the capacity");
                assert_eq!(Some(&frame), message.get(0));
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    let queued = drain(&mut recv_queue);
    assert_eq!(vec![Bytes::from(vec![0]), Bytes::from(vec![1]), Bytes::from(vec![2])], queued);

    // Read, the queue takes messages again.
    backend
        .send_to_peer(&peer_id, message_with_frame(b"after"))
        .await
        .expect("room again once read");
    assert_eq!(vec![Bytes::from_static(b"after")], drain(&mut recv_queue));
}

#[crate::async_rt::test]
async fn test_router_peer_that_never_reads_does_not_hold_up_the_others() {
    let backend = router_with_capacity(2);
    let (stuck, _stuck_queue) = insert_bounded_peer(&backend, "stuck").await;
    let (reader, mut reader_queue) = insert_bounded_peer(&backend, "reader").await;
    for _ in 0..5 {
        let _ = backend.send_to_peer(&stuck, message_with_frame(b"x")).await;
    }
    backend
        .send_to_peer(&reader, message_with_frame(b"reply"))
        .await
        .expect("another peer is served");
    assert_eq!(vec![Bytes::from_static(b"reply")], drain(&mut reader_queue));
}

#[crate::async_rt::test]
async fn test_router_send_to_a_peer_that_is_gone_removes_it() {
    let backend = router_with_capacity(2);
    let (peer_id, recv_queue) = insert_bounded_peer(&backend, "gone").await;
    drop(recv_queue);
    let error = backend
        .send_to_peer(&peer_id, message_with_frame(b"lost"))
        .await
        .expect_err("closed queue");
    assert!(matches!(error, ZmqError::BufferFull(_)));
    assert!(backend.peers.get_async(&peer_id).await.is_none());
    assert!(matches!(
        backend.send_to_peer(&peer_id, message_with_frame(b"again")).await,
        Err(ZmqError::Other(_))
    ));
}

#[crate::async_rt::test]
async fn test_router_without_a_capacity_queues_past_the_buffer_as_before() {
    // Unset, the option changes nothing: each send queues on a clone of the peer's
    // sender, which always has room (so the queue is not bounded).
    let backend =
        GenericSocketBackend::with_options(None, SocketType::ROUTER, SocketOptions::default());
    let (_first, _first_queue) = insert_peer(&backend, "first".parse().expect("id")).await;
    let peer_id: PeerIdentity = "small-buffer".parse().expect("peer id");
    let (send_queue, mut recv_queue) = mpsc::channel(1);
    backend
        .peers
        .upsert_async(peer_id.clone(), Peer::new(send_queue))
        .await;
    backend.refresh_single_peer_cache();
    for _ in 0..10 {
        backend
            .send_to_peer(&peer_id, message_with_frame(b"x"))
            .await
            .expect("queued");
    }
    assert_eq!(10, drain(&mut recv_queue).len());
}
