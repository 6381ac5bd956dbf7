/* tests/peers/threaded.cpp: the shape of heaptrack's tests/manual/threaded,
 * written for this battery. Each round starts 4 tasks that each allocate
 * 1000 small blocks with operator new, takes their blocks, and starts 4
 * more tasks that delete them: up to 8 threads alive at once (std::async,
 * one thread per task), every one of which exits. The allocations and their
 * sizes are the same on every run; which thread is alive when is not. */
#include <future>
#include <vector>

namespace
{

constexpr int rounds = 100;
constexpr int tasks = 4;
constexpr int blocks = 1000;

std::vector<char *> make_blocks(int task)
{
	std::vector<char *> v;

	v.reserve(blocks);
	for (int i = 0; i < blocks; i++)
		v.push_back(new char[16 + (i + task) % 48]);
	return v;
}

void free_blocks(std::vector<char *> v)
{
	for (char *p : v)
		delete[] p;
}

} // namespace

int main()
{
	for (int r = 0; r < rounds; r++) {
		std::vector<std::future<std::vector<char *>>> made;
		std::vector<std::future<void>> freed;

		made.reserve(tasks);
		freed.reserve(tasks);
		for (int t = 0; t < tasks; t++)
			made.push_back(std::async(std::launch::async, make_blocks, t));
		for (auto &f : made)
			freed.push_back(std::async(std::launch::async, free_blocks, f.get()));
		for (auto &f : freed)
			f.get();
	}
	return 0;
}
