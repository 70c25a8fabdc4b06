/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * wire.c - the benchmark rig's network: two tap devices joined, packets
 * carried both ways, as a link between two hosts would.
 *
 *   wire TAP_A TAP_B
 *
 * Makes the two taps (IFF_TAP, with virtio-net headers and checksum and
 * TSO offloads on, as a VM's NIC has), prints "ready" once both exist,
 * and then copies every frame read from one into the other until killed.
 * The caller gives the taps their addresses and moves one of them into
 * another network namespace (tools/bench/rig.py, class Wire).
 *
 * What it models: on loopback, the receiving socket's TCP work runs in
 * the sender's system call and an ACK's sending runs the peer's receipt
 * of it, so a reader and a server on one machine pay each other's TCP
 * work.  Over the wire, a frame written into a tap is received in this
 * process (as a NIC's interrupt would be), and a frame sent out of one
 * only queues it for this process, so each side's system calls pay for
 * its own socket only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <unistd.h>

/* A virtio-net header and the largest TSO frame. */
#define FRAME_MAX (12 + 65536 + 4096)

struct leg {
	int from, to;
	const char *name;
};

static int tap_open(const char *name)
{
	struct ifreq ifr;
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "wire: /dev/net/tun: %s\n", strerror(errno));
		exit(1);
	}
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
		fprintf(stderr, "wire: tap %s: %s\n", name, strerror(errno));
		exit(1);
	}
	if (ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) <
	    0) {
		fprintf(stderr, "wire: tap %s offloads: %s\n", name,
			strerror(errno));
		exit(1);
	}
	return fd;
}

static void *carry(void *arg)
{
	struct leg *l = arg;
	char *frame = malloc(FRAME_MAX);

	if (!frame)
		abort();
	for (;;) {
		ssize_t n = read(l->from, frame, FRAME_MAX);

		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			fprintf(stderr, "wire: %s: read: %s\n", l->name,
				n ? strerror(errno) : "end of file");
			exit(1);
		}
		/* A frame the other side cannot take (its device down, its
		 * queue full) is lost, as on a link. */
		if (write(l->to, frame, (size_t)n) < 0 && errno != EIO &&
		    errno != EAGAIN && errno != ENOBUFS && errno != EINTR) {
			fprintf(stderr, "wire: %s: write: %s\n", l->name,
				strerror(errno));
			exit(1);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct leg ab, ba;
	pthread_t t;
	int a, b;

	if (argc != 3) {
		fprintf(stderr, "usage: wire TAP_A TAP_B\n");
		return 2;
	}
	/* Ends with the rig that started it, however that ends, so that no
	 * tap outlives its run. */
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() == 1)
		return 1;
	a = tap_open(argv[1]);
	b = tap_open(argv[2]);
	ab = (struct leg){ a, b, argv[1] };
	ba = (struct leg){ b, a, argv[2] };
	if (pthread_create(&t, NULL, carry, &ab) != 0) {
		fprintf(stderr, "wire: pthread_create failed\n");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	carry(&ba);
	return 0;
}
