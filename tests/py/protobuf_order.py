"""Builds the order of tests/js/order.proto with Python's `protobuf` package and prints its bytes.

Usage: protobuf_order.py PROTO_DIR ID -- compiles PROTO_DIR/order.proto with grpcio-tools'
protoc into a temporary folder, builds `shop.Order` (id ID, item "tea", tags green and loose,
cents -250) and writes its serialized bytes as hex on standard output.
"""

import importlib
import os
import sys
import tempfile

from grpc_tools import protoc


def main() -> None:
    proto_dir, order_id = sys.argv[1], int(sys.argv[2])
    out = tempfile.mkdtemp(prefix="order-proto-")
    status = protoc.main(
        ["protoc", f"-I{proto_dir}", f"--python_out={out}", os.path.join(proto_dir, "order.proto")]
    )
    if status != 0:
        sys.exit(f"protoc failed on {proto_dir}/order.proto: {status}")
    sys.path.insert(0, out)
    order_pb2 = importlib.import_module("order_pb2")
    order = order_pb2.Order(id=order_id, item="tea", tags=["green", "loose"], cents=-250)
    sys.stdout.write(order.SerializeToString().hex())


if __name__ == "__main__":
    main()
