// SPDX-License-Identifier: MIT
#include <errno.h>
#include <string.h>

#include "seccomp_eval.h"

/* The instructions seccomp accepts (kernel/seccomp.c seccomp_check_filter):
 * loads of the data's words, its length and immediates, scratch memory,
 * ALU, jumps forward, returns. */
static int load_abs(const struct seccomp_data *d, uint32_t k, uint32_t *ret)
{
	if (k > sizeof(*d) - 4 || k & 3)
		return -EINVAL;
	memcpy(ret, (const unsigned char *)d + k, 4);
	return 0;
}

static int alu(uint16_t op, uint32_t *a, uint32_t v)
{
	switch (op) {
	case BPF_ADD:
		*a += v;
		return 0;
	case BPF_SUB:
		*a -= v;
		return 0;
	case BPF_MUL:
		*a *= v;
		return 0;
	case BPF_DIV:
		if (!v)
			return -EINVAL;
		*a /= v;
		return 0;
	case BPF_MOD:
		if (!v)
			return -EINVAL;
		*a %= v;
		return 0;
	case BPF_AND:
		*a &= v;
		return 0;
	case BPF_OR:
		*a |= v;
		return 0;
	case BPF_XOR:
		*a ^= v;
		return 0;
	case BPF_LSH:
		*a = v < 32 ? *a << v : 0;
		return 0;
	case BPF_RSH:
		*a = v < 32 ? *a >> v : 0;
		return 0;
	case BPF_NEG:
		*a = -*a;
		return 0;
	default:
		return -EINVAL;
	}
}

static int jump(uint16_t op, uint32_t a, uint32_t v, const struct sock_filter *f, size_t *pc)
{
	int taken;

	switch (op) {
	case BPF_JEQ:
		taken = a == v;
		break;
	case BPF_JGT:
		taken = a > v;
		break;
	case BPF_JGE:
		taken = a >= v;
		break;
	case BPF_JSET:
		taken = (a & v) != 0;
		break;
	default:
		return -EINVAL;
	}
	*pc += taken ? f->jt : f->jf;
	return 0;
}

int mp_seccomp_eval(const struct sock_filter *prog, size_t n, const struct seccomp_data *d,
		    uint32_t *ret)
{
	uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = { 0 };
	int r = 0;

	if (!n || n > BPF_MAXINSNS)
		return -EINVAL;
	/* jumps only go forward: at most n steps */
	for (size_t pc = 0; pc < n && r == 0; pc++) {
		const struct sock_filter *f = &prog[pc];
		uint16_t cls = BPF_CLASS(f->code);

		switch (cls) {
		case BPF_LD:
		case BPF_LDX: {
			uint32_t v;

			if (f->code == (BPF_LD | BPF_W | BPF_ABS))
				r = load_abs(d, f->k, &v);
			else if (BPF_MODE(f->code) == BPF_LEN)
				v = sizeof(*d);
			else if (BPF_MODE(f->code) == BPF_IMM)
				v = f->k;
			else if (BPF_MODE(f->code) == BPF_MEM && f->k < BPF_MEMWORDS)
				v = mem[f->k];
			else
				r = -EINVAL;
			if (r == 0 && cls == BPF_LD)
				a = v;
			else if (r == 0)
				x = v;
			break;
		}
		case BPF_ST:
		case BPF_STX:
			if (f->k >= BPF_MEMWORDS)
				return -EINVAL;
			mem[f->k] = cls == BPF_ST ? a : x;
			break;
		case BPF_ALU:
			r = alu(BPF_OP(f->code), &a, BPF_SRC(f->code) == BPF_X ? x : f->k);
			break;
		case BPF_JMP:
			if (BPF_OP(f->code) == BPF_JA) {
				if (f->k >= n - pc - 1)
					return -EINVAL;
				pc += f->k;
				break;
			}
			r = jump(BPF_OP(f->code), a, BPF_SRC(f->code) == BPF_X ? x : f->k, f, &pc);
			if (r == 0 && pc + 1 >= n)
				return -EINVAL;
			break;
		case BPF_RET:
			if (BPF_RVAL(f->code) == BPF_A)
				*ret = a;
			else if (BPF_RVAL(f->code) == BPF_K)
				*ret = f->k;
			else
				return -EINVAL;
			return 0;
		case BPF_MISC:
			if (BPF_MISCOP(f->code) == BPF_TAX)
				x = a;
			else if (BPF_MISCOP(f->code) == BPF_TXA)
				a = x;
			else
				return -EINVAL;
			break;
		default:
			return -EINVAL;
		}
	}
	return -EINVAL;
}

int mp_seccomp_allows(uint32_t ret)
{
	uint32_t act = MP_SECCOMP_ACTION(ret);

	return act == SECCOMP_RET_ALLOW || act == SECCOMP_RET_LOG;
}
