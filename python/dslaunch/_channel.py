"""gRPC channels of a rank: plaintext, or mutual TLS when its agent runs with
--tls_dir (Note [Mutual TLS], common/tls_files.h): DSLAUNCH_TLS_DIR names a
folder with ca.crt, tls.crt and tls.key."""

import os

import grpc

from . import _contract as c

# The files of a TLS folder (common/tls_files.h, kTlsCaFile/kTlsCertFile/kTlsKeyFile).
TLS_FILES = ("ca.crt", "tls.crt", "tls.key")


def open_channel(address):
    """A channel to `address`: TLS with the host's certificate when the
    contract names a TLS folder, else plaintext."""
    folder = os.environ.get(c.TLS_DIR)
    if not folder:
        return grpc.insecure_channel(address)
    contents = []
    for name in TLS_FILES:
        path = os.path.join(folder, name)
        try:
            with open(path, "rb") as f:
                contents.append(f.read())
        except OSError as e:
            raise RuntimeError("%s=%s: cannot read %s: %s" % (c.TLS_DIR, folder, name, e.strerror)) from e
    ca, cert, key = contents
    credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    return grpc.secure_channel(address, credentials)
