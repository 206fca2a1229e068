"""Writes vectors.json and the key pair beside it with the real Salt 3008.5 crypto
(salt.crypt): a 2048-bit key pair from write_keys, Salt's X9.31 signatures (the request
`tok`, PrivateKey.encrypt) with what its verifier (PublicKey.decrypt) recovers from each,
its PKCS#1 v1.5 signatures (sign), OAEP ciphertexts for the
private key (PublicKey.encrypt) and Crypticle blobs under a fixed key string.

Run with the reference venv's Python: $HALITE_SALT_VENV/bin/python gen_vectors.py
The key pair, signatures and X9.31 tokens are deterministic given the key; the OAEP and
Crypticle outputs are randomised (each run writes different, equally valid bytes).
"""
import base64
import hashlib
import json
import os

import salt.crypt
import salt.version

here = os.path.dirname(os.path.abspath(__file__))
b64 = lambda b: base64.b64encode(b).decode()

priv_path = os.path.join(here, "salt.pem")
if not os.path.exists(priv_path):
    salt.crypt.write_keys(here, "salt", 2048)
with open(priv_path, "rb") as f:
    priv = salt.crypt.PrivateKey(f.read())
with open(os.path.join(here, "salt.pub"), "rb") as f:
    pub = salt.crypt.PublicKey(f.read())

# The request `tok`, edge lengths, and messages shaped like the sign-in's (a digest
# in hex and a counter): enough that the signer sends both s and n - s.
messages = [b"salt", b"", b"x" * 100, bytes(range(200))]
messages += [(hashlib.sha256(bytes([i])).hexdigest() + str(i)).encode() for i in range(64)]
def recovered(sig):
    """What Salt's verifier (PublicKey.decrypt) recovers, or None if it refuses."""
    try:
        return b64(pub.decrypt(sig))
    except ValueError:
        return None


x931 = []
for m in messages:
    sig = priv.encrypt(m)
    x931.append({"msg": b64(m), "sig": b64(sig), "recovered": recovered(sig)})
sigs = [
    {"algo": algo, "msg": b64(m), "sig": b64(priv.sign(m, algo))}
    for algo in (salt.crypt.PKCS1v15_SHA1, salt.crypt.PKCS1v15_SHA224)
    for m in (b"", b"reply", bytes(range(256)) * 4)
]
oaep = [
    {"algo": algo, "plain": b64(m), "cipher": b64(pub.encrypt(m, algo))}
    for algo, limit in ((salt.crypt.OAEP_SHA1, 214), (salt.crypt.OAEP_SHA224, 198))
    for m in (b"", b"secret", bytes(range(limit)))
]
key_string = base64.b64encode(bytes(range(24 + 32))).decode()
c = salt.crypt.Crypticle({}, key_string)
crypticle = [{"plain": b64(bytes((i * 7 + n) % 256 for i in range(n))), "blob": b64(c.encrypt(bytes((i * 7 + n) % 256 for i in range(n))))} for n in range(0, 40)]

out = {
    "salt_version": salt.version.__version__,
    "x931": x931,
    "signatures": sigs,
    "oaep": oaep,
    "crypticle": {"key_string": key_string, "blobs": crypticle},
}
with open(os.path.join(here, "vectors.json"), "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
