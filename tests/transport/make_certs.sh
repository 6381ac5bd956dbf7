#!/bin/sh
# SPDX-License-Identifier: MIT
# A throw-away CA and a server certificate it signs for 127.0.0.1 and
# localhost, in directory $1 (ca.pem, server.pem, server.key), and a
# second CA (other-ca.pem) that signed nothing of it.
set -eu
d=$1
cd "$d"
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $ec -keyout ca.key -out ca.pem -days 2 -subj /CN=memprof-test-ca 2>/dev/null
openssl req -x509 $ec -keyout other-ca.key -out other-ca.pem -days 2 -subj /CN=other-ca 2>/dev/null
openssl req $ec -keyout server.key -out server.csr -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' > ext.cnf
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
	-days 2 -extfile ext.cnf 2>/dev/null
