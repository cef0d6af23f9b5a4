"""How people and agents reach the commands: the command line (cli), the MCP server, the JSON
documents both print (output), their shared argument checks (arguments) and the agent skill.

May import every layer but kernelwiki.docsite's hooks, which mkdocs loads.
"""
