import os

print("making generated/node.py")
os.makedirs("generated", exist_ok=True)
with open("generated/node.py", "w") as file:
    file.write(
        "import os\n"
        "from dora import Node\n"
        "node = Node()\n"
        "print('RESULT built node says', os.environ['GREETING'], flush=True)\n"
    )
