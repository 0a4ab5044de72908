"""The code-editing workload of ``pyagent bench spec-decode``: fix or change a given function or class.

Each prompt hands the model a complete piece of Python (12 to 25 lines) and asks for one small change
with the complete code in the answer, so most of a good answer copies its input - the situation
prompt lookup and suffix decoding are built for. The snippets are ordinary application code (parsing,
bookkeeping, small data structures); the requested edits are a bug fix, type hints, a rename, a
resource fix or an off-by-one. The prompts were written once, in this order, before any was run.
"""

from __future__ import annotations

_TASKS: tuple[tuple[str, str], ...] = (
    (
        "Fix the bug in this class (pop should remove the last item, not the first) and show the "
        "complete corrected class.",
        "class Stack:\n"
        "    def __init__(self):\n"
        "        self.items = []\n"
        "\n"
        "    def push(self, item):\n"
        "        self.items.append(item)\n"
        "\n"
        "    def pop(self):\n"
        "        if not self.items:\n"
        "            raise IndexError('pop from an empty stack')\n"
        "        return self.items.pop(0)\n"
        "\n"
        "    def peek(self):\n"
        "        if not self.items:\n"
        "            raise IndexError('peek at an empty stack')\n"
        "        return self.items[-1]\n"
        "\n"
        "    def size(self):\n"
        "        return len(self.items)\n"
        "\n"
        "    def is_empty(self):\n"
        "        return len(self.items) == 0\n",
    ),
    (
        "This function should turn strings like '1h30m' or '45s' into seconds, but minutes are "
        "counted wrong. Fix it and output the whole function.",
        "def parse_duration(text):\n"
        "    total = 0\n"
        "    number = ''\n"
        "    for char in text:\n"
        "        if char.isdigit():\n"
        "            number += char\n"
        "        elif char == 'h':\n"
        "            total += int(number) * 3600\n"
        "            number = ''\n"
        "        elif char == 'm':\n"
        "            total += int(number) * 6\n"
        "            number = ''\n"
        "        elif char == 's':\n"
        "            total += int(number)\n"
        "            number = ''\n"
        "        else:\n"
        "            raise ValueError('unknown unit: ' + char)\n"
        "    return total\n",
    ),
    (
        "Rewrite this function to open the file with a with statement so it is always closed; "
        "keep everything else as it is and give the complete function.",
        "def read_config(path):\n"
        "    f = open(path)\n"
        "    config = {}\n"
        "    for line in f.readlines():\n"
        "        line = line.strip()\n"
        "        if not line or line.startswith('#'):\n"
        "            continue\n"
        "        key, value = line.split('=', 1)\n"
        "        config[key.strip()] = value.strip()\n"
        "    f.close()\n"
        "    return config\n",
    ),
    (
        "Rename the function calc to order_total everywhere in this code and show the full code.",
        "TAX_RATE = 0.2\n"
        "\n"
        "\n"
        "def calc(items):\n"
        "    total = 0\n"
        "    for item in items:\n"
        "        total += item['price'] * item['quantity']\n"
        "    return total\n"
        "\n"
        "\n"
        "def calc_with_tax(items):\n"
        "    return calc(items) * (1 + TAX_RATE)\n"
        "\n"
        "\n"
        "def print_receipt(items):\n"
        "    for item in items:\n"
        "        print(item['name'], item['price'] * item['quantity'])\n"
        "    print('total', calc(items))\n"
        "    print('with tax', calc_with_tax(items))\n",
    ),
    (
        "The moving average below skips the last window. Fix the off-by-one error and return the "
        "complete function.",
        "def moving_average(values, window):\n"
        "    if window <= 0:\n"
        "        raise ValueError('window must be positive')\n"
        "    averages = []\n"
        "    for start in range(len(values) - window):\n"
        "        chunk = values[start:start + window]\n"
        "        averages.append(sum(chunk) / window)\n"
        "    return averages\n",
    ),
    (
        "Add type hints to every method of this class and output the complete class.",
        "class Inventory:\n"
        "    def __init__(self):\n"
        "        self.counts = {}\n"
        "\n"
        "    def add(self, name, quantity):\n"
        "        self.counts[name] = self.counts.get(name, 0) + quantity\n"
        "\n"
        "    def remove(self, name, quantity):\n"
        "        if self.counts.get(name, 0) < quantity:\n"
        "            raise ValueError('not enough ' + name)\n"
        "        self.counts[name] -= quantity\n"
        "\n"
        "    def count(self, name):\n"
        "        return self.counts.get(name, 0)\n"
        "\n"
        "    def names(self):\n"
        "        return sorted(self.counts)\n",
    ),
)

CODE_EDITING: tuple[str, ...] = tuple(f"{task}\n\n```python\n{code}```" for task, code in _TASKS)
"""The prompts, in order: a request, then the code in a fenced Python block."""
