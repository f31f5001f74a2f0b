from trainstack.commands.main import run_and_exit

run_and_exit()
